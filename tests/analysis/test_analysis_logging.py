"""Analyses report to the run's loggers: scalars, images and (where the logger takes them, as W&B) tables."""

from __future__ import annotations

from omegaconf import OmegaConf

from poslab.analysis.logging import log_analysis

logged: list[tuple[str, object]] = []


class TableLogger:
    """A logger with W&B's interface for images and tables."""

    def __init__(self, save_dir: str, version: str) -> None:
        logged.append(("init", (save_dir, version)))

    def log_metrics(self, metrics: dict[str, float]) -> None:
        logged.append(("metrics", metrics))

    def log_image(self, key: str, images: list[str]) -> None:
        logged.append(("image", (key, images)))

    def log_table(self, key: str, columns: list[str], data: list[list]) -> None:
        logged.append(("table", (key, columns, data)))

    def finalize(self, status: str) -> None:
        logged.append(("finalize", status))


def test_scalars_images_and_tables_reach_the_runs_logger(tmp_path):
    logged.clear()
    cfg = OmegaConf.create(
        {"logger": {"table": {"_target_": f"{__name__}.TableLogger", "save_dir": "elsewhere", "version": None}}}
    )
    png = tmp_path / "well.png"
    png.write_bytes(b"png")
    used = log_analysis(
        cfg, tmp_path, {"hrope/U*": -0.5}, {"hrope/well": png}, {"hrope/curve": (["k", "residual"], [[1, -0.5]])}
    )
    assert used == ["table"]
    assert logged == [
        ("init", (str(tmp_path), "analysis")),  # the run's own directory, never the training log's version
        ("metrics", {"hrope/U*": -0.5}),
        ("image", ("hrope/well", [str(png)])),
        ("table", ("hrope/curve", ["k", "residual"], [[1, -0.5]])),
        ("finalize", "success"),
    ]
