"""Where a run ran: the CPU name read from /proc/cpuinfo, with a fallback when it is absent."""

from pathlib import Path

from poslab.running.runtime import cpu_model


def test_cpu_model_reads_the_first_model_name(tmp_path: Path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Test CPU 9000 @ 3.0GHz\n\nmodel name\t: other\n")
    assert cpu_model(cpuinfo) == "Test CPU 9000 @ 3.0GHz"


def test_cpu_model_falls_back_without_cpuinfo(tmp_path: Path):
    assert cpu_model(tmp_path / "absent") not in ("", "Test CPU 9000 @ 3.0GHz")


def test_the_environment_records_the_host_and_torch():
    """results.json's ``environment``: the CPU model (a report says when a table mixes them) and torch's version."""
    import torch

    from poslab.running.runtime import environment

    found = environment()
    assert found["torch"] == torch.__version__ and found["cpu"] and found["cpu"] != "unknown"
