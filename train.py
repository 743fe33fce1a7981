"""Train one configuration, or many with -m. See README.md; `python train.py --help` lists the settings.

python train.py task=seen encoding=rope
python train.py -m experiment=extrapolation_grid
"""

import sys
import warnings

import hydra
from omegaconf import DictConfig

from poslab.running.resolvers import register_resolvers

register_resolvers()  # the resolvers the configs name, before Hydra composes them (light imports: no torch)
# conf/hydra/launcher/submitit_local.yaml keeps the plugin's name on purpose; Hydra 1.3 warns that it is
# validated against the plugin's schema of the same name (the launcher's module silences it in the jobs)
warnings.filterwarnings("ignore", message=r"(?s).*submitit_local' is validated against ConfigStore schema")


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> None:
    # imported here, not above: a refused config stops before torch loads
    from poslab.running.training import main as run_training

    run_training(cfg)


if __name__ == "__main__":
    from poslab.running.precheck import check_command_line, help_text

    if {"--help", "-h"} & set(sys.argv[1:]):  # poslab's own help (Hydra's: --hydra-help)
        print(help_text())
        sys.exit(0)
    # every job's config, the directories it writes and the data it reads, checked before Hydra writes anything
    # and ~ / $VAR expanded in path settings before Hydra names the run directory from them
    sys.argv[1:] = check_command_line(sys.argv[1:], sources=True)  # a bad one: one sentence, exit status 2
    main()
