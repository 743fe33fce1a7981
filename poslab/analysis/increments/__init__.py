"""Learned position increments: what a byte-level model thinks the distance between its tokens is
(``poslab analyze increments RUN_DIR``).

A model with learned increments advances its position counter by a positive δ per byte token (and per layer); a
token's position is the running sum of the increments up to and including it. The analysis is in three layers:

* ``compute``: loads the checkpoint, reads δ of every token of held-out text (``held_out``: which text, and which
  source each document came from) and returns the summary, ``increments_analysis.json``;
* ``readings`` (δ by byte category, word-boundary scores and ceilings) on ``text`` (byte categories, UTF-8
  characters, jieba's words), with the statistics (``roc_auc``, ``best_auc_given``) in ``poslab.analysis.stats``;
* ``render``: the printed report, the two CSVs and the pictures from the summary alone, so ``--from
  increments_analysis.json`` re-renders them without a model; ``report`` joins the layers for the command.

Changes made when the two modules ``increments`` and ``increments_report`` became this package: the summary
JSON keeps its name and every key it had, and holds what the render layer needs besides (``corpus``, ``steps``,
``layers``, ``category_text``, ``validation_documents``, ``notes``, ``pictures`` with each sentence's δ, and in
``boundaries`` the ``characters``, ``text`` and ``documents`` of the boundary section); a re-render does not log
to the run's loggers again. The printed report, the CSVs and the pictures are as they were.
"""
