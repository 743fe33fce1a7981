"""What a setting is and may be: the typed settings every group declares (``settings``, ``passkey_settings``), the
YAML values they hold, Hydra's override strings, and a run's config read back from disk (``targets``). The bottom
layer with ``poslab.errors`` and ``poslab.io``: every other layer imports it, and it imports none of them.

Composing a run's config (``poslab.running.compose``) needs the encodings' and corpora's registries, so it sits
with running, above them."""
