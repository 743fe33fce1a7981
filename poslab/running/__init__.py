"""A run, from its config to its results: compose and check the config (``compose``, ``checks``, ``precheck``,
``memory``, ``resolvers``), build the datamodule, module, loggers and callbacks (``builders``, ``callbacks``,
``loggers``), start from a parent run (``extension``), and train and test (``training``, on top: only ``train.py``
imports it). Hydra's callbacks (``hydra_callbacks``) and process settings (``runtime``) live here too. What a run
leaves on disk is ``poslab.runs``; the analyses of finished runs are ``poslab.analysis``."""
