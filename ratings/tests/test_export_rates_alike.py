"""The arena's export, read by the engine, rates the models as the leaderboard's own read does:
a lab that rates the exported file gets the site's ratings."""

from io import StringIO

import pytest
from django.core.management import call_command

from ratings.engine.api import rate
from ratings.engine.data import flatten_conv_metadata
from ratings.engine.io import read_battles
from ratings.vote_sources import rating_battles

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_arena_export_rates_exactly_as_the_leaderboard_does(rated_models, tmp_path, suffix):
    path = tmp_path / f"votes{suffix}"
    call_command("export_votes", "--format=arena", f"--output={path}", stderr=StringIO())
    from_export = rate(read_battles(path), ci="sandwich", with_online_elo=False)
    site = rating_battles()
    site = flatten_conv_metadata(site[["model_a", "model_b", "winner", "conv_metadata"]])
    from_site = rate(site, ci="sandwich", with_online_elo=False)
    ratings = {m.model: m.rating for m in from_export.models}
    assert ratings == pytest.approx({m.model: m.rating for m in from_site.models})
    assert sorted(ratings, key=ratings.get, reverse=True) == ["alpha", "beta", "gamma"]
    assert from_export.style_coefficients == pytest.approx(from_site.style_coefficients)
