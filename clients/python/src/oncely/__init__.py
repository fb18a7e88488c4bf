"""oncely for Python: a worker for oncely's lease queues and a transactional enqueue.

A job's database effects commit together with its dedup marker, or not at all: a handler's
writes go through the transaction in which the worker then calls complete_job(). A handler
with no writes to fence takes only the job, and its job is completed in a batch. Uses only
the SQL worker protocol (docs/protocol.md) over psycopg 3.
"""

from ._enqueue import close_batch, enqueue, open_batch
from ._errors import ConfigError, InvalidPayload, OncelyError, PermanentError, RetryIn, UnknownKind
from ._handler import Handler, JobHandler, TransactionalHandler
from ._job import Job
from ._outcome import Action, Outcome, decide
from ._worker import Worker

__all__ = ["Action", "ConfigError", "Handler", "InvalidPayload", "Job", "JobHandler", "OncelyError", "Outcome",
           "PermanentError", "RetryIn", "TransactionalHandler", "UnknownKind", "Worker", "close_batch", "decide",
           "enqueue", "open_batch"]
__version__ = "0.1.0"
