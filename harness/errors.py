"""User-facing errors: one line that names the problem, never a deep traceback."""


class DraftcountError(Exception):
    """An error caused by the user's input (paths, options, prompts, configs).

    The CLI prints its message on one line and exits with status 2; library code
    raises it instead of letting torch or transformers fail deep inside a call.
    """
