"""LightningModules: one per kind of task, sharing ``TransformerModule``."""

from poslab.lightning_modules.base import TransformerModule
from poslab.lightning_modules.language import LanguageModelModule
from poslab.lightning_modules.synthetic import SyntheticTaskModule

__all__ = ["LanguageModelModule", "SyntheticTaskModule", "TransformerModule"]
