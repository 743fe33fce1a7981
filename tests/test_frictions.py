"""Small frictions a new user hit (issue 39, item 3; docs/frictions.md): each one a clear message or a fix."""

from __future__ import annotations

import logging

import pytest

from poslab.datamodules.corpora import SourceGroup, check_local_corpus, local_pattern, resolve_group
from poslab.datamodules.corpora.writer import describe_splits
from poslab.encodings.rope_scaling import MAX_SCALING_FACTOR, validate_scaling
from poslab.errors import ConfigError


def test_corpus_path_expands_home_and_environment_variables(tmp_path, monkeypatch):
    (tmp_path / "book.txt").write_text("one document\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("POSLAB_DATA", str(tmp_path))
    assert local_pattern("~/book.txt", "text") == str(tmp_path / "book.txt")
    assert local_pattern("$POSLAB_DATA/book.txt", "text") == str(tmp_path / "book.txt")
    assert local_pattern("${POSLAB_DATA}/book.txt", "text") == str(tmp_path / "book.txt")
    check_local_corpus({"path": "$POSLAB_DATA/book.txt", "format": "text", "segmentation": None})


def test_a_folder_of_extensionless_files_is_read_as_text(tmp_path):
    folder = tmp_path / "letters"
    folder.mkdir()
    (folder / "README").write_text("first letter\n")
    (folder / "NOTES").write_text("second letter\n")
    (folder / "skip.jsonl").write_text('{"text": "not text"}\n')
    check_local_corpus({"path": str(folder), "format": "text", "segmentation": None})
    group = SourceGroup.from_config(
        "main", {"local": [{"pattern": local_pattern(str(folder), "text"), "format": "text", "extensionless": True}]}
    )
    files = [path.name for _, path in resolve_group("local", group, tmp_path, "strict").files]
    assert files == ["NOTES", "README"]
    # other formats keep their one extension: a folder of extensionless files under jsonl still matches nothing
    with pytest.raises(ConfigError, match=r"matches nothing"):
        check_local_corpus({"path": str(tmp_path / "letters" / "NOTES.nothing"), "format": "jsonl"})


def test_a_file_reached_twice_is_read_once_with_a_warning(tmp_path, caplog):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a document\n")
    (tmp_path / "data" / "link.txt").symlink_to(tmp_path / "data" / "a.txt")
    sources = [{"pattern": "data/*.txt", "format": "text"}, {"pattern": "data/a.txt", "format": "text"}]
    group = SourceGroup.from_config("main", {"local": sources})
    with caplog.at_level(logging.WARNING):
        files = resolve_group("local", group, tmp_path, "strict").files
    assert [path.name for _, path in files] == ["a.txt"]
    assert "a.txt" in caplog.text and "twice" in caplog.text


def test_an_empty_split_is_described_in_words_not_a_dict():
    text = describe_splits({"train": {"documents": 1, "tokens": 12}, "validation": {"documents": 0, "tokens": 0}})
    assert text == "train: 1 document, 12 tokens; validation: 0 documents, 0 tokens"
    assert "{" not in text


@pytest.mark.parametrize("rule", ["linear", "ntk", "yarn", "llama3"])
@pytest.mark.parametrize("factor", [1e9, float("inf"), 0.5, "eight"])
def test_scaling_factors_are_bounded(rule, factor):
    settings = {"scaling": rule, "scaling_factor": factor, "original_length": 128, "test_scaling": "none"}
    with pytest.raises(ConfigError, match=rf"encoding.scaling_factor=.*{int(MAX_SCALING_FACTOR)}"):
        validate_scaling(settings)
    validate_scaling({**settings, "scaling_factor": 8})


def test_yarn_betas_must_be_numbers_in_order():
    base = {"scaling": "yarn", "scaling_factor": 4, "original_length": 128, "test_scaling": "none"}
    for bad in ({"beta_slow": -1}, {"beta_fast": 1, "beta_slow": 32}):
        with pytest.raises(ConfigError, match=r"encoding.beta_"):
            validate_scaling({**base, **bad})


def test_an_unquoted_tilde_on_the_command_line_says_how_to_quote_it():
    from poslab.running.precheck import parse

    with pytest.raises(ConfigError, match=r"""corpus\.path=~/x: .*'~' only quoted; give 'corpus\.path="~/x"'"""):
        parse(["corpus=local", "corpus.path=~/x"])
    assert parse(['corpus.path="~/x"'])[0].value() == "~/x"  # what the message says parses, and is expanded later


def test_a_lock_file_is_removed_and_never_held_twice(tmp_path):
    import threading
    import time

    from poslab.datamodules.locking import removed_lock

    lock, holders, most = tmp_path / "x.lock", [], []

    def hold(pause: float) -> None:
        with removed_lock(lock):
            holders.append(1)
            most.append(len(holders))
            time.sleep(pause)
            holders.pop()

    threads = [threading.Thread(target=hold, args=(0.02 * (i % 3),)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert len(most) == 12 and max(most) == 1  # all went through, one at a time, files removed between them
    assert not lock.exists()


def test_preparing_a_corpus_leaves_no_lock_file(tmp_path):
    from poslab.datamodules.corpora import prepare_corpus

    (tmp_path / "data").mkdir()
    for i in range(4):
        (tmp_path / "data" / f"d{i}.txt").write_text(f"document {i} " * 40 + "\n")
    corpus = {"name": "tiny", "groups": {"main": {"local": [{"pattern": "data/*.txt", "format": "text"}]}}}
    prepare_corpus(corpus, tmp_path, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("**/*.lock"))


def test_a_tiny_held_out_sample_is_said_in_a_note():
    from poslab.datamodules.held_out import EvaluationPlan
    from poslab.datamodules.language import MIN_WINDOWS, small_sample_note

    tiny = EvaluationPlan(
        train_length=128, lengths=[128], spans={"main": 128}, val_span=128, groups=["main"], token_budget=128
    )
    note = small_sample_note(tiny, 3000)  # 3000 held-out tokens: 23 windows at 128, enough
    assert note is None
    note = small_sample_note(tiny, 150)
    assert note is not None and "150 tokens, scored as 1 window of 128 tokens" in note
    assert f"fewer than {MIN_WINDOWS}" in note
    # a short sample asked for (val_windows=1) from enough held-out text is no note
    assert small_sample_note(tiny, 128 * MIN_WINDOWS + 1) is None


def test_a_list_setting_of_the_wrong_length_is_refused_up_front():
    import typing

    from poslab.config.settings import OptimizerSettings, check_value, value_fits

    betas = typing.get_type_hints(OptimizerSettings, include_extras=True)["betas"]
    with pytest.raises(ConfigError, match=r"optimizer\.betas=\[0\.9\] is not allowed.*exactly 2 long"):
        check_value("optimizer.betas", [0.9], betas)
    with pytest.raises(ConfigError, match=r"optimizer\.betas=\[0\.9, 'a'\]"):
        check_value("optimizer.betas", [0.9, "a"], betas)
    assert value_fits([0.9, 0.99], betas) and value_fits(None, betas)


LENGTH_CASES = [  # (the group's overrides, a list of the wrong length, its message, one of the right length)
    (
        ["encoding=alibi", "model.n_heads=4"],
        "encoding.slopes=[0.5,0.25]",
        r"encoding\.slopes=\[0\.5, 0\.25\] is not allowed \(it has 2 values\); .*4 long, one per head "
        r"\(model\.n_heads=4\)",
        "encoding.slopes=[0.5,0.25,0.125,0.0625]",
    ),
    (
        ["encoding=rope_nope_mix", "model.n_layers=3"],
        "encoding.base=[10000,500000]",
        r"encoding\.base=\[10000, 500000\] is not allowed \(it has 2 values\); .*3 long, one per layer "
        r"\(model\.n_layers=3\)",
        "encoding.base=[10000,500000,10000]",
    ),
]


@pytest.mark.parametrize(("group", "wrong", "message", "right"), LENGTH_CASES, ids=["heads", "layers"])
def test_a_list_whose_length_another_setting_decides_is_refused_before_training(group, wrong, message, right, tmp_path):
    from poslab.running.checks import COMMON_STAGES, check_configs
    from poslab.running.compose import compose_config

    # stage 1 (typed settings, before torch loads and before any encoding is built) refuses it, naming the length
    with pytest.raises(ConfigError, match=message):
        COMMON_STAGES["settings"](compose_config([*group, wrong], tmp_path))
    bad_item = wrong.replace("0.25", "abc").replace("500000", "abc")  # the right kind of element, too: named
    with pytest.raises(ConfigError, match=r"is not allowed \(its element 'abc' is not a number"):
        COMMON_STAGES["settings"](compose_config([*group, bad_item], tmp_path))
    check_configs([compose_config([*group, right], tmp_path)], lambda cfg: None)  # every stage passes the right length


def test_every_path_setting_expands_home_and_environment_variables(tmp_path, monkeypatch):
    from poslab.config.overrides import expanded_overrides
    from poslab.running.compose import compose_config

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SCRATCH", str(tmp_path / "scratch"))
    monkeypatch.setenv("POSLAB_CACHE_DIR", "~/cache")  # a default from the environment, expanded too
    given = ['paths.data_dir="~/corpora"', "paths.log_dir=$SCRATCH/logs", "corpus=wikitext2"]
    cfg = compose_config(given)
    assert cfg.paths.data_dir == str(tmp_path / "home" / "corpora") == cfg.task.data_dir
    assert cfg.paths.log_dir == str(tmp_path / "scratch" / "logs")
    assert cfg.paths.cache_dir == str(tmp_path / "home" / "cache") == cfg.task.cache_dir
    # what Hydra reads (train.py passes it the expanded command line): the run directory lands under the expanded path
    assert expanded_overrides(['paths.log_dir="~/logs"', "seed=1", "paths.data_dir='$SCRATCH/a','~/b'"]) == [
        f"paths.log_dir='{tmp_path}/home/logs'",
        "seed=1",
        f"paths.data_dir='{tmp_path}/scratch/a','{tmp_path}/home/b'",
    ]
    monkeypatch.delenv("POSLAB_CACHE_DIR")
    for bad, key in (("paths.data_dir=$NO_SUCH_DIR/x", "paths.data_dir"), ('+parent="$NO_SUCH_DIR/run"', "parent")):
        with pytest.raises(ConfigError, match=rf"{key}=\$NO_SUCH_DIR/\w+ names the environment variable NO_SUCH_DIR, "):
            compose_config([bad])
    monkeypatch.setenv("POSLAB_LOG_DIR", "${NO_SUCH_DIR}/logs")
    with pytest.raises(
        ConfigError, match=r"paths\.log_dir=\$\{NO_SUCH_DIR\}/logs names .*NO_SUCH_DIR, which is not set"
    ):
        compose_config([])


def test_an_unquoted_tilde_in_a_paths_setting_says_how_to_quote_it():
    from poslab.running.precheck import parse

    with pytest.raises(ConfigError, match=r"""paths\.data_dir=~/x: .*'~' only quoted; give 'paths\.data_dir="~/x"'"""):
        parse(["paths.data_dir=~/x"])


@pytest.mark.slow
def test_a_run_directory_under_a_tilde_log_dir_is_made_in_home(tmp_path):
    from tests.conftest import run_train

    home = tmp_path / "home"
    args = ["task=seen", "debug=fast", "~callbacks.progress_bar", "threads=1", "trainer.max_steps=1"]
    result = run_train([*args, 'paths.log_dir="~/logs"'], tmp_path, env={"HOME": str(home)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(list((home / "logs" / "runs").glob("*/results.json"))) == 1
    assert not (tmp_path / "~").exists()  # not a folder named ~ in the working directory
