"""A run on disk: its files and their names (``files``), one run per directory (``guard``), the checkpoint
input/output and resume (``checkpoints``), finished runs' results read back (``results``), multirun job folders
(``folders``) and local multiruns (``launching``). Below the config checks and training, above the model and data:
nothing under model, encodings, datamodules or lightning_modules imports it."""
