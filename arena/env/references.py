"""Reference models' answers to a submission's prompt: the pool's when the prompt is in the
pool, else generated once from the reference model's provider and stored."""

import uuid


def references_request(*, submission_id: uuid.UUID) -> None:
    """Make sure every reference model of the submission's run has (or will get) an answer to
    its prompt. Called after the submission commits."""
    # Being written (helper 4): pool lookup and the generation task.
    return None
