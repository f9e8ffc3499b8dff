# lm-evaluation-harness's `lm_eval` command as is, for venvs that lack pytablewriter (the local pip
# mirrors do not hold it): lm_eval imports it only to print its results table after the results and
# samples are written, and would then exit 1. Where pytablewriter is missing the table is replaced
# by a line saying so; elsewhere nothing changes. Arguments are lm_eval's own.
import importlib.util

import lm_eval.utils

if importlib.util.find_spec("pytablewriter") is None:
    lm_eval.utils.make_table = lambda *_args, **_kwargs: "(no results table: pytablewriter is not installed)"

from lm_eval.__main__ import cli_evaluate

cli_evaluate()
