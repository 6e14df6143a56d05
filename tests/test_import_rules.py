"""What the ratings app may import from the arena and the environment app, as a list the build checks (import-linter's
contracts forbid; they cannot allow). ratings is downstream: it reads votes, writes back what a
fit decides (flags, sampling statistics, environment rewards) and hears the arena's signals,
each through the one module named below. An import outside the list fails here, so that a new
crossing is a decision written down, not an accident."""

import grimp

# arena or environment module -> why ratings may import it.
ALLOWED = {
    "arena.models": "the rows a fit reads and the snapshots' foreign keys",
    "arena.selectors": "votes for the leaderboard's fit and the anomaly run (the vote selectors)",
    "arena.signals": "vote_recorded and the other signals the refits hang on",
    "arena.admin": "the staff admin site the snapshots register on",
    "arena.services.flags": "writing the anomaly run's flags back (a write service)",
    "arena.sampling.store": "handing the active sampler its statistics (a write service)",
    "arena.sampling.stats": "the statistics' shape the sampler reads",
    "arena.transparency": "the arena's half of /transparency (counts of left-out votes)",
    "arena.ledger": "the fairness ledger's counts on /transparency and in the snapshot",
    "arena.recognisability": "the pool's recognisability estimate shown on /transparency",
    "environment.models": "the runs and completions the reward model scores",
    "environment.rewards": "storing a group's refitted rewards (a write service)",
    "environment.selectors": "a group's votes for its reward fit",
    "environment.model_rewards": "registering the reward model's availability with the env API",
}


def test_ratings_imports_from_the_arena_and_the_environment_only_what_the_list_allows():
    graph = grimp.build_graph("ratings", "arena", "environment", include_external_packages=False)
    crossings: dict[str, set[str]] = {}
    for module in graph.modules:
        if not module.startswith("ratings") or ".tests" in module or ".migrations" in module:
            continue
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.startswith(("arena", "environment")):
                crossings.setdefault(imported, set()).add(module)
    assert crossings, "the graph found no crossing at all: the check reads nothing"
    unlisted = {name: sorted(by) for name, by in crossings.items() if name not in ALLOWED}
    assert unlisted == {}
    # ...and the list says only what is true: an entry nothing imports any more goes.
    assert sorted(set(ALLOWED) - set(crossings)) == []
