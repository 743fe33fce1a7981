"""``hydra/launcher=submitit_local`` (conf/hydra/launcher/submitit_local.yaml): every multirun job in its own
process through submitit, the code path of ``hydra/launcher=slurm``, on this machine.

Hydra's own submitit local launcher hands all jobs to submitit at once, and on one machine submitit starts them
all together (126 processes for ``experiment=lm_zoo``). This one submits each job as a one-job sweep of that
launcher, ``POSLAB_JOBS`` at a time (``poslab.runs.launching.launch_one_at_a_time``); pickling the job, the child
process and its logs (``<sweep dir>/.submitit/<job id>/``) stay the plugin's own code.
"""

from __future__ import annotations

import warnings
from typing import Any

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher

from poslab.runs.launching import launch_one_at_a_time

# conf/hydra/launcher/submitit_local.yaml shares its name with the plugin's schema on purpose (the name users
# know), which Hydra 1.3 validates against the schema and warns about in every process, the jobs' included
warnings.filterwarnings("ignore", message=r"(?s).*submitit_local' is validated against ConfigStore schema")


class PoslabSubmititLocalLauncher(LocalLauncher):
    def launch(self, job_overrides: Any, initial_job_idx: int) -> Any:
        return launch_one_at_a_time(super().launch, job_overrides, initial_job_idx)
