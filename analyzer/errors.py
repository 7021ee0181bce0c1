"""Errors a user can cause. The CLI turns them into one line and exit code 2."""


class TraceError(Exception):
    """A trace file (or directory) that cannot be analyzed: the message names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # picklable, so a worker process can raise it
        return (TraceError, (self.path, self.problem))


class UsageError(Exception):
    """A bad option or argument, reported as one line with exit code 2."""

