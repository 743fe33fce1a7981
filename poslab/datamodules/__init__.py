"""Data: synthetic tasks, and language modelling on real corpora (``corpora.py`` prepares them)."""

from poslab.datamodules.language import LanguageModelDataModule
from poslab.datamodules.synthetic import SyntheticDataModule, SyntheticTask

__all__ = ["LanguageModelDataModule", "SyntheticDataModule", "SyntheticTask"]
