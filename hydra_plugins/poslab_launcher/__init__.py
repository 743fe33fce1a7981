"""poslab's Hydra launcher plugin (Hydra instantiates launchers only from the ``hydra_plugins`` package)."""
