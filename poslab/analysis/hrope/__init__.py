"""The hRoPE write-up's analyses: interventions on the paragraph index, residual attention, the well, the shuffle test.

Everything runs on held-out documents (the run's validation split), one window per document (its first
``context_length`` tokens, kept when it holds at least two paragraphs), through the explicit attention path
(``Transformer.forward(..., return_attention=True)``), whatever the encoding.

**Residual attention.** Attention is averaged over layers and heads, then its log is taken (as the write-up
does). Before fitting we add ``log(n_keys)`` (``n_keys = i + 1`` for query ``i``): a softmax over more keys
spreads thinner, and that has nothing to do with distance; the result is log attention relative to uniform.
Over all query/key pairs ``j < i`` of all documents a trend in the token distance ``d = i - j`` is fitted by
least squares, and the residual is what distance alone does not explain. The trend is ``linear`` by default
(``a + b d``, the write-up's form: one slope, no freedom to soak up paragraph structure); ``log`` adds a
``c log d`` term (attention often decays like a power of distance at short range) for a robustness check.
The trend is fitted *together with one offset per paragraph displacement* (same-paragraph pairs are the
reference, offset 0): fitted alone over all pairs, the trend would absorb part of the well, since
displacement grows with distance (a planted well of depth -0.9 came back as -0.51); fitted jointly, the mean
residual at each displacement is exactly its offset, the attention change at a fixed token distance. So U* is not
the write-up's estimator (a linear trend fitted alone, no ``+log n``): its values are not the write-up's U*, and a
claim about the write-up's U* magnitudes is not testable with it (docs/hrope.md, Decisions).

**The well.** For pairs in different paragraphs (displacement ``k`` = number of paragraph boundaries between
key and query, ``k >= 1``), the mean residual per ``k``; ``U*`` is its most negative point among displacements
with at least ``min_pairs`` pairs. Every statistic is a sum over pairs, so each document contributes a few
sufficient statistics (``X'X``, ``X'y`` and per-``k`` sums): the analysis streams over documents in batches,
its memory does not grow with their number, and the bootstrap over documents reweights those sums.

**Interventions** change only the paragraph index (tokens, order, token distances, sentence indices fixed):
``fake-merge`` gives the two real paragraphs around the boundary nearest the window's middle one index (later
paragraphs move down by one); ``fake-split`` gives the second half of the longest paragraph a new index (later
ones move up). "Cross-paragraph attention" has more than one reading (``INTERVENTION_READINGS``), each the
change after minus before: ``same_pairs``, the mean log attention of the pairs across that boundary (queries
after it, keys before it, within the two paragraphs involved); ``persistent_mass``, the attention mass the
queries just after the boundary put on keys lying in another paragraph both before and after; and
``real_cross_mass``, their mass on keys outside their real paragraph. A model blind to the paragraph index
gives exactly 0 under each (attention does not move). The mass by the labels *after* the intervention is not
offered: it moves for a blind model too (the labels move, the attention does not). An encoding that reads no
paragraph index but segments of its own (BiPE with ``encoding.segment=sentence``) gets the same interventions on
that coordinate instead (``compute.hierarchy``; the split at the nearest token inside a segment,
``segment_split_position``), read by the same paragraph labels; the report says the write-up's do not apply to it.

**Shuffle test** (the write-up's): the whole paragraphs between the first and the last are put in a random
order, the first (token 0, the attention sink) and the last (truncated by the window) stay in place, so a
window needs four paragraphs; indices are renumbered in the new order and U* recomputed on those documents.
Reported: ``ΔU* = U*(shuffled) - U*`` on the same documents, with a paired bootstrap interval over documents.

**The well's shape** (``shape``; the write-up's H3, "suppression grows to about 2-5 paragraphs, then shrinks"): on
the main reading's curve, growth ``r(2) - r(1)`` and recovery ``r(last) - U*`` (``last``: the largest displacement
with ``min_pairs`` pairs), each with its document replicates from the bootstrap resamples' curves.

**Over seeds and documents** (``poslab.analysis.hrope.seeds``, ``poslab.analysis.hrope.intervals``): every run of
a corpus reads the same held-out documents and resamples them the same way, so a figure over an arm's seeds is a
seeds x documents design, crossed. Its interval, which the verdicts read (docs/verdicts.md): the seed mean ± t(S −
1) x sqrt(seed term + document term), the seed term the seeds' variance / S, the document term the variance of the
seed mean over the shared document resamples (each run's bootstrap replicates, kept in the summary); two arms on
one corpus are compared on their per-seed and per-resample differences (paired), two corpora by Welch's on the two
groups' terms. The t-interval over seeds alone (``Interval.of``: the documents held fixed) is printed beside it as
a secondary figure, and is all there is for a figure without document replicates (summaries written before the
replicates were kept; bits/byte of runs whose results.json holds no per-document losses), which is said so and
decides no verdict. The bits/byte's replicates resample the validation split's documents (the figure's own, the same
in every run of a corpus: ``compute.bits_per_byte_replicates``), not the analysis's windows. The intervals over
documents of one run serve the per-run table.

**Readings of U*** (``u_readings``): the main one above, and four changes for robustness: without ``+log n``,
key 0 left out, the trend fitted on same-paragraph pairs only, the other trend form.

**The package, in three layers.** Compute (needs the model): ``documents`` (windows, interventions, shuffles),
``attention`` (the forward pass and the pair sums), ``well`` (the fit and U*), ``compute`` (the batches, the
run, the summary ``hrope.json``). Plain data shared by all: ``readings``, ``runs`` (``RunAnalysis`` and its JSON
entry), ``shape`` (the well's shape), ``intervals`` (over seeds and documents), ``seeds`` (figures and
comparisons over seeds and documents).
Render (the summary alone): ``render`` (tables, CSV, the report), ``plots`` (PNGs). The command: ``report``
(``poslab analyze hrope``, ``--from hrope.json``). Every interval over seeds and documents is ``intervals``'s,
every other interval, test and bootstrap ``poslab.analysis.stats``'s. The modules are imported by name (nothing is
re-exported here), so the render layer never loads torch.
"""
