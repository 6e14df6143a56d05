"""Live battles: two models answer a visitor's prompt, streamed side by side over a websocket.

The feature in one package. The page opens one socket per battle (``consumer``: the protocol's
frames, and nothing else); each ``start``, ``turn`` or ``regenerate`` frame plans a turn
(``turns``), which draws the pair (``draw``: by sampling weight, or the two named), applies the
limits (``limits``: prompt length, calls per address, battles streaming per session; the limits
themselves are read by ``arena.selectors.live_limits``) and creates both messages as streaming.
Both answers then stream at once from any OpenAI-compatible endpoint (``upstream``), token by
token straight to the socket, while the process's runtime (``runtime``: a small pool of database
threads, a saver of partial answers, the retried saves of turns lost to a database outage) keeps
the database up to date. When a turn ends, ``turns.battle_turn_finish`` saves both answers, the
battle becomes votable (or errored/aborted), and each provider's circuit breaker (``breaker``)
hears how its answer went. A beat task (``arena.tasks.live_battles_sweep``, calling ``sweep``)
settles battles a stopped server left streaming. The vote itself goes over HTTP, as for pool
battles. Images a visitor attaches are uploaded over HTTP first (``images``: validated,
re-encoded, stored), then named by id in the ``start`` frame and sent with the first turn.
"""
