"""The OmegaConf resolvers the configs name, registered in one place (idempotent), before Hydra composes a config:
by train.py at import, by ``poslab.running.compose.compose_config``, and by the ``Resolvers`` Hydra callback in a
launcher's
own process. Light: the functions they call are imported here, none of them loads torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf


def resolvers() -> dict[str, Callable[..., Any]]:
    """Each resolver's name and function, with the config that uses it."""
    from poslab.config.settings import expand_path
    from poslab.datamodules.corpora import local_corpus_name, local_pattern
    from poslab.running.extension import parent_name
    from poslab.runs.folders import job_folder
    from poslab.runs.launching import parallel_jobs

    return {
        "poslab_jobs": lambda devices=1: parallel_jobs(devices),  # local_parallel's n_jobs (conf/hydra/launcher)
        "poslab_job_folder": job_folder,  # a multirun job's folder (conf/hydra/default.yaml)
        "poslab.corpus_name": local_corpus_name,  # corpus=local's name, from its path (conf/corpus/local.yaml)
        "poslab.local_pattern": local_pattern,  # corpus=local's files
        "poslab.parent_name": parent_name,  # experiment=context_extension's run name, from its parent's
        "poslab.path": expand_path,  # paths.*'s POSLAB_*_DIR defaults, ~ and $VAR expanded (conf/paths/default.yaml)
    }


def register_resolvers() -> None:
    """Register every resolver not registered yet."""
    for name, function in resolvers().items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, function)
