"""Template tags of the live battle page."""

from django import template

from arena.services.live import live_battles_enabled

register = template.Library()


@register.simple_tag
def live_battles_on() -> bool:
    """Whether the battle page serves live battles (at least two live models available)."""
    return live_battles_enabled()
