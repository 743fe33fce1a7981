"""A refused command leaves nothing: 20 bad commands of train.py, each stopped by the checks made before Hydra
writes anything (poslab.running.precheck), with exit status 2, one sentence naming the bad value, and no directory
left behind; a refusal found inside a job (from the data) removes the directory Hydra made for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_train

#: (id, arguments, environment, words the message must hold); ``{tmp}`` is the test's directory, where
#: ``{tmp}/file`` is a regular file and ``{tmp}/corpus`` a folder of two small text files
BAD_COMMANDS = [
    ("negative seed", ["task=seen", "seed=-1"], {}, ["seed=-1"]),
    ("seed past 2**32", ["task=seen", "seed=4294967296"], {}, ["seed=4294967296"]),
    ("negative eval seed", ["task=seen", "task.eval_seed=-5"], {}, ["eval_seed=-5"]),
    ("missing data_dir", ["corpus=wikitext2_offline", "paths.data_dir={tmp}/missing"], {}, ["{tmp}/missing"]),
    ("missing local corpus", ["corpus=local", "corpus.path={tmp}/nowhere"], {}, ["{tmp}/nowhere"]),
    ("POSLAB_JOBS=abc", ["-m", "task=seen", "seed=0,1"], {"POSLAB_JOBS": "abc"}, ["POSLAB_JOBS", "abc"]),
    ("POSLAB_JOBS=0", ["task=seen"], {"POSLAB_JOBS": "0"}, ["POSLAB_JOBS", "'0'"]),
    ("log dir is a file", ["task=seen"], {"POSLAB_LOG_DIR": "{tmp}/file"}, ["POSLAB_LOG_DIR", "{tmp}/file"]),
    ("log dir under a file", ["task=seen"], {"POSLAB_LOG_DIR": "{tmp}/file/logs"}, ["POSLAB_LOG_DIR", "{tmp}/file"]),
    (
        "cache dir under a file",
        ["corpus=local", "corpus.path={tmp}/corpus"],
        {"POSLAB_CACHE_DIR": "{tmp}/file/cache"},
        ["POSLAB_CACHE_DIR", "{tmp}/file/cache"],
    ),
    (
        "cache dir a file",
        ["corpus=local", "corpus.path={tmp}/corpus", "paths.cache_dir={tmp}/file"],
        {},
        ["paths.cache_dir={tmp}/file"],
    ),
    ("non-ASCII name unquoted", ["task=seen", "name=实验一"], {}, ["name=实验一", "name='实验一'"]),
    ("multirun with one bad job", ["-m", "task=seen", "seed=0,-1"], {}, ["seed=-1"]),
    ("run dir under a file", ["task=seen", "hydra.run.dir={tmp}/file/run"], {}, ["hydra.run.dir", "{tmp}/file"]),
    ("sweep dir under a file", ["-m", "task=seen", "seed=0,1", "hydra.sweep.dir={tmp}/file/s"], {}, ["{tmp}/file"]),
    ("zero steps", ["task=seen", "trainer.max_steps=0"], {}, ["trainer.max_steps=0"]),
    ("unknown encoding", ["encoding=nonesuch"], {}, ["nonesuch"]),
    ("a task and a corpus", ["task=seen", "corpus=wikitext2"], {}, ["corpus=wikitext2"]),
    ("name with a path", ["task=seen", "name=../x"], {}, ["name='../x'"]),
    ("misspelled setting", ["task=seen", "model.d_modl=64"], {}, ["d_modl"]),
]


def run_train_with(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``run_train`` with environment variables of the test's own (``POSLAB_LOG_DIR`` among them)."""
    return run_train(args, cwd, timeout=120, env=env)


def everything_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


@pytest.fixture
def workplace(tmp_path: Path) -> Path:
    (tmp_path / "file").write_text("a regular file, where a directory is asked for\n")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("One small document. " * 100)
    (corpus / "b.txt").write_text("Another small document. " * 100)
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize(("args", "env", "words"), [c[1:] for c in BAD_COMMANDS], ids=[c[0] for c in BAD_COMMANDS])
def test_a_refused_command_says_one_sentence_and_leaves_nothing(workplace, args, env, words):
    tmp = str(workplace)
    before = everything_under(workplace)
    done = run_train_with(
        [a.replace("{tmp}", tmp) for a in args], workplace, {k: v.replace("{tmp}", tmp) for k, v in env.items()}
    )
    message = done.stderr.strip()
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(message.splitlines()) == 1 and message.startswith("poslab: configuration error: "), message
    for word in words:
        assert word.replace("{tmp}", tmp) in message, message
    assert "Traceback" not in done.stderr + done.stdout
    assert everything_under(workplace) == before  # no run, sweep or log directory, no cache


def test_twenty_bad_commands():
    assert len(BAD_COMMANDS) == 20


@pytest.mark.slow
def test_a_refusal_inside_a_job_removes_its_directory(workplace):
    """Found only from the data (a context longer than the corpus's training split): the job had made its
    directory, its lock and train.log; the refusal removes them, and the log directory Hydra made."""
    corpus, cache = workplace / "corpus", workplace / "cache"
    args = ["corpus=local", f"corpus.path={corpus}", f"paths.cache_dir={cache}", "task.context_length=4096"]
    done = run_train([*args, "trainer.max_steps=2", "task.val_windows=1"], workplace, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().startswith("poslab: configuration error: "), done.stderr[-3000:]
    assert "context_length=4096" in done.stderr or "4097" in done.stderr
    assert not (workplace / "logs").exists(), sorted(everything_under(workplace / "logs"))


def test_a_read_only_directory_is_refused(tmp_path, monkeypatch):
    """A log or cache directory this user may not write (root may write anywhere: os.access stands in)."""
    from poslab.errors import ConfigError
    from poslab.running.precheck import check_writable

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(ConfigError, match=r"paths.log_dir=.*/logs \(POSLAB_LOG_DIR\) cannot be written: .* read-only"):
        check_writable("paths.log_dir", str(tmp_path / "logs"))


def test_a_run_that_trained_keeps_its_directory(tmp_path):
    """Only what Hydra and a run's start write goes: metrics of trained steps, a checkpoint or a file of the user's
    keep the directory."""
    from poslab.running.training import remove_if_only_hydra_wrote

    run = tmp_path / "logs" / "runs" / "r"
    (run / ".hydra").mkdir(parents=True)
    (run / "train.log").write_text("")
    (run / "csv").mkdir()
    (run / "csv" / "hparams.yaml").write_text("")
    (run / "csv" / "metrics.csv").write_text("step,loss\n1,2.0\n")
    assert not remove_if_only_hydra_wrote(run, tmp_path / "logs")
    assert run.is_dir()
    (run / "csv" / "metrics.csv").unlink()
    assert remove_if_only_hydra_wrote(run, tmp_path / "logs")
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["task=lag"], {"POSLAB_LOG_DIR": "{afile}/logs"}),
        (["corpus=local", "corpus.path={tmp}/texts"], {"POSLAB_CACHE_DIR": "{afile}/cache"}),
        (["corpus=wikitext2_offline", "paths.data_dir={tmp}/nothing"], {"HF_HUB_OFFLINE": "1"}),
    ],
    ids=["log dir under a file", "cache dir under a file", "data dir that does not exist"],
)
def test_paths_are_refused_before_torch_loads(tmp_path, args, env):
    """Directories and data paths need no torch: the pre-check says them before the encodings' stage imports it
    (under a second, where torch and Lightning take seconds)."""
    (tmp_path / "afile").write_text("")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("A short document.\n" * 50)
    fill = {"afile": str(tmp_path / "afile"), "tmp": str(tmp_path)}
    probe = (
        "import sys\n"
        "from poslab.running.precheck import check_command_line\n"
        "try:\n"
        f"    check_command_line({[a.format(**fill) for a in args]!r}, sources=True)\n"
        "except SystemExit as stop:\n"
        "    print('exit', stop.code, 'torch' in sys.modules, 'lightning' in sys.modules)\n"
    )
    environment = {**os.environ, **{k: v.format(**fill) for k, v in env.items()}}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "exit 2 False False", (result.stdout, result.stderr[-1500:])
    assert "configuration error" in result.stderr
