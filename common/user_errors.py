"""The one exception type for a mistake the user can fix, shared by every entry point.

A missing file, a typo'd or out-of-range setting, a busy directory, absent
credentials: the entry point prints the message as one line and exits with code 2
(common/console.py exit_with_error), never a traceback. Anything else is a bug and
keeps its traceback. Each stage's own error types (a bad setting, a dataset that
does not match its metadata, a busy output directory) subclass UserError, so an
entry point catches exactly one type.

    .venv/bin/python -c "from common import console, user_errors; console.exit_on_user_error(lambda: (_ for _ in ()).throw(user_errors.UserError('demo: the fix')))"
"""


class UserError(ValueError):
    """A mistake the user can fix; str(error) is the one line naming the problem and the fix.

    A ValueError, so the callers that caught ValueError for bad settings still do.
    """
