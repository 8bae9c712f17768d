"""User-facing errors: one line that names the problem, never a deep traceback."""


class DraftcountError(Exception):
    """An error caused by the user's input (paths, options, prompts, configs).

    The CLI prints its message on one line and exits with status 2; library code
    raises it instead of letting torch or transformers fail deep inside a call.
    """


def first_line(error: BaseException) -> str:
    """An exception's message, its first line only (its type's name when it has none): what a one-line error quotes
    of the library error beneath it."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
