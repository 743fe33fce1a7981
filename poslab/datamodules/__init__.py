"""Data: synthetic tasks now; real corpora build on the same interface."""

from poslab.datamodules.synthetic import SyntheticDataModule, SyntheticTask

__all__ = ["SyntheticDataModule", "SyntheticTask"]
