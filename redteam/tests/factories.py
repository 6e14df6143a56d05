import factory
from django.utils import timezone

from arena.tests.factories import ArenaModelFactory
from redteam.models import Attempt, Challenge


class ChallengeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Challenge

    slug = factory.Sequence(lambda n: f"challenge-{n}")
    title = factory.LazyAttribute(lambda o: o.slug.title())
    rule = "Never say the phrase."
    kind = Challenge.Kind.PHRASE
    target = "open sesame"


class AttemptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Attempt

    challenge = factory.SubFactory(ChallengeFactory)
    model = factory.SubFactory(ArenaModelFactory)
    player_id = factory.Sequence(lambda n: f"player-{n}")
    state = Attempt.State.SURRENDERED
    ended_at = factory.LazyFunction(timezone.now)
