#!/usr/bin/env bash
# The single rerun of both zoos (issues 37 and 38; docs/rerun.md) on a machine that may not outlive it: every
# sweep from its git worktree pinned at one commit, its finished runs kept in docs/ as they land, and a fresh
# machine back where the last one stood with two commands.
#
#   sweeps/rerun.sh setup              worktrees at the pinned commits (../sweep_*); each finished run's results.json
#                                      put back from docs/ into its run directory, so ckpt_path=auto skips it
#   sweeps/rerun.sh run SWEEP...       the sweeps one after another, in the foreground (wrap in setsid nohup)
#   sweeps/rerun.sh collect            finished runs' results.json copied into docs/ and committed alone
#   sweeps/rerun.sh status             finished runs per sweep, in docs/ and in the log directory
#   sweeps/rerun.sh commands           each sweep's multirun overrides (what run gives train.py -m)
#   sweeps/rerun.sh seeds SWEEP        the seed override run adds: the seeds not yet finished in the log directory
#   sweeps/rerun.sh reports [OUT]      the reports of the whole rerun, as docs/rerun.md lists them (sweeps/rerun_reports.py);
#                                      refused until the sweeps they read are whole in docs/, unless OUT (written there)
#   sweeps/rerun.sh pause | resume     every chain `run` started here (under setsid) stopped where it is (SIGSTOP), or
#                                      continued (SIGCONT): both cores free for a CI run or a benchmark, nothing lost
#
# Environment: POSLAB_LOG_DIR (default ../runs), POSLAB_CACHE_DIR (../cache), POSLAB_DATA_DIR (../shared/corpora),
# POSLAB_JOBS (runs at a time within a sweep, default 1), PYTHON (default .venv/bin/python of this checkout).
# The sweeps whose analysis loads the models (hrope_*: `poslab analyze hrope` needs the checkpoints, which never
# enter the repository) are not put back by setup: they train again, and are analysed in the session they finish.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT=$(dirname "$REPO")
export POSLAB_LOG_DIR=${POSLAB_LOG_DIR:-$ROOT/runs}
export POSLAB_CACHE_DIR=${POSLAB_CACHE_DIR:-$ROOT/cache}
export POSLAB_DATA_DIR=${POSLAB_DATA_DIR:-$ROOT/shared/corpora}
export POSLAB_JOBS=${POSLAB_JOBS:-1} HF_HUB_OFFLINE=1 WANDB_MODE=offline
PYTHON=${PYTHON:-$REPO/.venv/bin/python}

SWEEPS="lm_zoo lm_zoo_absolute position_zoo_v3 diagnostic_tasks hrope_causal hrope_bipe \
lm_passkey_causal cope_counting_128_v2 hrope_allocation_causal"
LM_ZOO_ENCODINGS=none,rope,alibi,increments_shared,increments_layer,hrope_axial,rand_axial,period_axial,xpos,\
randomized_rope,rope_nope_mix,t5_bias,kerple_log,kerple_power,fire,sandwich,ssmax,cope,forget_gate,path,path_fox,\
stick_breaking,selective,dape,fope,bipe
ABSOLUTE='*encoding-learned_*|*encoding-sinusoid_*'  # run directories of lm_zoo_absolute among docs/lm_zoo_rerun/runs

SEEDED="lm_zoo lm_zoo_absolute position_zoo_v3"  # sweeps over seeds 0-4 (their config's), total/5 runs a seed
SEEDS="0 1 2 3 4"

# sweep -> "worktree commit sweep-directory docs-folder runs reloads-models"
describe() {
  case $1 in
    lm_zoo) echo "sweep_lm 05476a0 lm_zoo lm_zoo_rerun/runs 260 no" ;;
    lm_zoo_absolute) echo "sweep_abs 2a331c1 lm_zoo_absolute lm_zoo_rerun/runs 20 no" ;;
    position_zoo_v3) echo "sweep 83a2030 position_zoo_v3 position_zoo/v3/runs 980 no" ;;
    diagnostic_tasks) echo "sweep_diag 40bb03c diagnostic_tasks diagnostic_tasks/runs 72 no" ;;
    hrope_causal) echo "sweep_diag 40bb03c hrope_causal hrope/causal/runs 36 yes" ;;
    hrope_bipe) echo "sweep_diag 40bb03c hrope_bipe hrope/bipe/runs 18 yes" ;;
    lm_passkey_causal) echo "sweep_diag 40bb03c lm_passkey_causal lm_extrapolation/passkey_causal/runs 6 no" ;;
    cope_counting_128_v2) echo "sweep_diag 40bb03c cope_counting_128_v2 position_zoo/cope_counting_128_v2/runs 27 no" ;;
    hrope_allocation_causal) echo "sweep_diag 40bb03c hrope_allocation_causal hrope/allocation_causal/runs 18 yes" ;;
    *) echo "unknown sweep '$1': the sweeps are $SWEEPS" >&2; return 2 ;;
  esac
}

# the overrides of each sweep's multiruns, one line each (docs/rerun.md; tests/test_rerun_doc.py counts their runs)
overrides() {
  local dir=$POSLAB_LOG_DIR/multirun
  case $1 in
    lm_zoo) echo "experiment=lm_zoo encoding=$LM_ZOO_ENCODINGS" ;;
    lm_zoo_absolute) echo "experiment=lm_zoo encoding=learned,sinusoid hydra.sweep.dir=$dir/lm_zoo_absolute" ;;
    position_zoo_v3) echo "experiment=position_zoo" ;;
    diagnostic_tasks) echo "experiment=diagnostic_tasks task=associative_recall model.n_layers=2"  # width
      echo "experiment=diagnostic_tasks task=state_tracking model.d_model=64" ;;               # depth
    hrope_causal) echo "experiment=hrope_axial_cpu,rand_axial_cpu,period_axial_cpu,hrope_rope_cpu \
corpus=python_code,wikitext2_offline,openwebtext seed=0,1,2 ckpt_path=auto hydra.sweep.dir=$dir/hrope_causal" ;;
    hrope_bipe) echo "experiment=hrope_bipe_cpu encoding.inter=rope,alibi corpus=python_code,wikitext2_offline,openwebtext \
seed=0,1,2 ckpt_path=auto hydra.sweep.dir=$dir/hrope_bipe" ;;
    lm_passkey_causal) echo "experiment=lm_passkey encoding=hrope_axial,rand_axial,period_axial corpus=wikitext2 \
seed=0,1 ckpt_path=auto hydra.sweep.dir=$dir/lm_passkey_causal" ;;
    cope_counting_128_v2) echo "experiment=cope_counting task.train_length=128 task.eval_lengths=[128,256] \
ckpt_path=auto hydra.sweep.dir=$dir/cope_counting_128_v2" ;;
    hrope_allocation_causal) echo "experiment=hrope_axial_cpu,rand_axial_cpu,period_axial_cpu \
encoding.frequencies=interleaved,token_first corpus=python_code seed=0,1,2 ckpt_path=auto \
hydra.sweep.dir=$dir/hrope_allocation_causal" ;;
  esac
}

# does run directory NAME of docs folder belong to SWEEP (lm_zoo and its absolute arms share a folder)?
belongs() {
  local sweep=$1 name=$2
  case $sweep in
    lm_zoo) eval "case \$name in $ABSOLUTE) return 1 ;; esac" ;;
    lm_zoo_absolute) eval "case \$name in $ABSOLUTE) return 0 ;; esac"; return 1 ;;
  esac
  return 0
}

setup() {
  local sweep worktree commit directory docs total models name
  for sweep in $SWEEPS; do
    read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
    [[ -d $ROOT/$worktree ]] || git -C "$REPO" worktree add --detach "$ROOT/$worktree" "$commit"
    [[ $models == yes ]] && continue
    for name in $(ls "$REPO/docs/$docs" 2>/dev/null); do
      belongs "$sweep" "$name" || continue
      local target=$POSLAB_LOG_DIR/multirun/$directory/$name
      [[ -f $target/results.json ]] && continue
      mkdir -p "$target" && cp "$REPO/docs/$docs/$name/results.json" "$target/results.json"
    done
  done
  status
}

# the override that leaves out a seeded sweep's finished seeds (each of its runs finished in the log directory):
# "seed=2,3,4"; nothing where every seed has runs to do (the command as documented), "none" where none has. The
# pinned code checks every job's config before any starts and then skips the finished ones, about a second a job:
# ten minutes a session for the position zoo's 980 jobs.
seeds() {
  local sweep=$1 worktree commit directory docs total models seed name count left=()
  read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
  case " $SEEDED " in *" $sweep "*) ;; *) return 0 ;; esac
  for seed in $SEEDS; do
    count=0
    for name in $(ls "$POSLAB_LOG_DIR/multirun/$directory" 2>/dev/null); do
      case $name in *_seed-"$seed"_*|*_seed-"$seed") ;; *) continue ;; esac
      [[ -f $POSLAB_LOG_DIR/multirun/$directory/$name/results.json ]] && belongs "$sweep" "$name" && count=$((count + 1))
    done
    (( count < total / 5 )) && left+=("$seed")
  done
  if (( ${#left[@]} == 0 )); then echo none
  elif (( ${#left[@]} < 5 )); then local joined; joined=$(IFS=,; echo "${left[*]}"); echo "seed=$joined"
  fi
}

run() {
  local sweep worktree commit directory docs total models
  for sweep in "$@"; do
    read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
    local only
    only=$(seeds "$sweep")
    echo "== $(date -u +%FT%TZ) $sweep from ../$worktree ($commit), POSLAB_JOBS=$POSLAB_JOBS${only:+, $only}"
    [[ $only == none ]] && continue
    local line
    while read -r line; do
      line="$line${only:+ $only}"
      set -f  # the overrides are words, never globs (task.eval_lengths=[128,256])
      # shellcheck disable=SC2086
      (cd "$ROOT/$worktree" && PYTHONPATH=$PWD "$PYTHON" train.py -m hydra/launcher=local_parallel $line < /dev/null)
      set +f
    done < <(overrides "$sweep")
  done
}

finished_in() {  # finished runs of SWEEP under DIRECTORY (a sweep directory or a docs folder)
  local sweep=$1 directory=$2 count=0 name
  for name in $(ls "$directory" 2>/dev/null); do
    [[ -f $directory/$name/results.json ]] && belongs "$sweep" "$name" && count=$((count + 1))
  done
  echo $count
}

status() {
  local sweep worktree commit directory docs total models
  for sweep in $SWEEPS; do
    read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
    printf '%-26s docs %4s of %4s   log directory %4s\n' "$sweep" "$(finished_in "$sweep" "$REPO/docs/$docs")" \
      "$total" "$(finished_in "$sweep" "$POSLAB_LOG_DIR/multirun/$directory")"
  done
}

collect() {
  local sweep worktree commit directory docs total models name source counts=()
  if ! git -C "$REPO" diff --cached --quiet; then
    echo "collect commits the runs' results.json alone: commit or unstage what is staged first" >&2
    return 1
  fi
  for sweep in $SWEEPS; do
    read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
    for source in "$POSLAB_LOG_DIR/multirun/$directory"/*/results.json; do
      [[ -f $source ]] || continue
      name=$(basename "$(dirname "$source")")
      belongs "$sweep" "$name" || continue
      mkdir -p "$REPO/docs/$docs/$name"
      cmp -s "$source" "$REPO/docs/$docs/$name/results.json" || cp "$source" "$REPO/docs/$docs/$name/results.json"
      git -C "$REPO" add "docs/$docs/$name/results.json"
    done
    counts+=("$sweep $(finished_in "$sweep" "$REPO/docs/$docs") of $total")
  done
  if git -C "$REPO" diff --cached --quiet; then echo "nothing new"; return 0; fi
  local joined
  joined=$(printf '%s, ' "${counts[@]}")
  git -C "$REPO" commit -q -m "Rerun of issues 37/38: finished runs' results.json (${joined%, })"
  git -C "$REPO" log --oneline -1
}

REPORTED="lm_zoo lm_zoo_absolute position_zoo_v3 lm_passkey_causal cope_counting_128_v2"  # what the reports read

reports() {
  local out=${1:-} sweep worktree commit directory docs total models count missing=()
  if [[ -n $out ]]; then
    out=$(realpath -m "$out")  # the caller's directory, not the repository's
  else
    for sweep in $REPORTED; do
      read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
      count=$(finished_in "$sweep" "$REPO/docs/$docs")
      (( count < total )) && missing+=("$sweep $count of $total")
    done
    if (( ${#missing[@]} )); then
      local joined; joined=$(printf '%s, ' "${missing[@]}")
      echo "reports: the rerun is not whole in docs/ (${joined%, } runs); give OUT, a directory outside the" \
        "repository, to write the reports of what is there into it" >&2
      return 1
    fi
  fi
  (cd "$REPO" && "$PYTHON" sweeps/rerun_reports.py ${out:+--out "$out"})
}

commands() {  # each sweep's runs and its multiruns' overrides, tab-separated (tests/test_rerun_doc.py reads them)
  local sweep worktree commit directory docs total models line
  for sweep in $SWEEPS; do
    read -r worktree commit directory docs total models <<<"$(describe "$sweep")"
    while read -r line; do printf '%s\t%s\t%s\n' "$sweep" "$total" "$line"; done < <(overrides "$sweep")
  done
}

chains() {  # the process groups of the chains `run` started from this checkout: a group led by a `rerun.sh run`
  # (setsid makes each its own group) whose directory is this checkout; a chain started without setsid shares its
  # caller's group, and one of another checkout is another's: both are left alone
  local pid
  for pid in $(ps -eo pid=,pgid=,args= | awk '$1 == $2 && /sweeps\/rerun\.sh run / { print $1 }'); do
    [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$REPO" ]] && echo "$pid"
  done
  return 0
}

signal_chains() {  # SIGNAL WORD: send SIGNAL to every chain's whole group
  local groups; groups=$(chains)
  if [[ -z $groups ]]; then echo "rerun.sh: no chain started by 'run' under setsid is running"; return 0; fi
  local group; for group in $groups; do kill "-$1" -- "-$group"; done
  echo "rerun.sh: $2 $(wc -w <<<"$groups") chain(s) (process groups $(tr '\n' ' ' <<<"$groups" | sed 's/ $//'))"
}

case ${1:-} in
  setup) setup ;;
  commands) commands ;;
  seeds) seeds "$2" ;;
  run) shift; run "$@" ;;
  collect) collect ;;
  status) status ;;
  reports) reports "${2:-}" ;;
  pause) signal_chains STOP paused ;;
  resume) signal_chains CONT resumed ;;
  *) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
