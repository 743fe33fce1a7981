"""trainer.precision=16-mixed on a CPU: Lightning trains in bf16-mixed instead (with a warning) while results.json
would record 16-mixed, so it is refused before anything runs, saying what a CPU allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from poslab.config.settings import check_precision
from poslab.errors import ConfigError
from poslab.running.checks import check_config
from poslab.running.compose import compose_config


@pytest.mark.parametrize("precision", ["16-mixed", "16"])
@pytest.mark.parametrize("trainer", ["cpu", "ddp_cpu"])
def test_16_mixed_on_the_cpu_is_refused_with_what_is_allowed(precision: str, trainer: str, tmp_path: Path) -> None:
    cfg = compose_config([f"trainer={trainer}", f"trainer.precision={precision}"], tmp_path / "run")
    message = rf"trainer.precision='?{precision}'? is not available on the CPU \(trainer.accelerator=cpu\)"
    with pytest.raises(ConfigError, match=message) as refused:
        check_config(cfg)
    assert "allowed on a CPU: 32-true or bf16-mixed" in str(refused.value)
    assert not (tmp_path / "run").exists()


def test_the_precisions_a_cpu_honours_pass_and_16_mixed_passes_on_a_gpu(tmp_path: Path) -> None:
    for precision in ("32-true", "bf16-mixed"):
        check_config(compose_config(["trainer=cpu", f"trainer.precision={precision}"], tmp_path / precision))
    assert check_precision("16-mixed", "gpu") == check_precision("16", "cuda") == "16-mixed"
    assert check_precision("16-mixed") == "16-mixed"  # a bare Trainer's, whose device is not known here
