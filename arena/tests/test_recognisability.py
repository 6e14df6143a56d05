"""``arena.recognisability``: how recognisable each model's pool answers are (no database)."""

from arena.recognisability import PoolAnswer, recognisability


def by_model(answers):
    return {r.model: r for r in recognisability(answers)}


def test_one_known_answer_recognises_every_appearance_without_rotation():
    answers = [PoolAnswer(prompt=p, model=m, turns=(f"{m} on {p}",)) for p in (1, 2) for m in "ab"]
    assert {m: r.exact_text for m, r in by_model(answers).items()} == {"a": 1.0, "b": 1.0}


def test_a_second_variant_halves_the_appearances_the_known_text_recognises():
    answers = [
        PoolAnswer(prompt=1, model="a", turns=("published", "second turn")),
        PoolAnswer(prompt=1, model="a", turns=("another", "other second turn")),
        PoolAnswer(prompt=2, model="a", turns=("published 2", "x")),
        PoolAnswer(prompt=1, model="b", turns=("b's", "y")),
    ]
    figures = by_model(answers)
    # Prompt 1 shows the known text half the time, prompt 2 always.
    assert figures["a"].exact_text == (0.5 + 1.0) / 2
    assert (figures["a"].prompts, figures["a"].variants) == (2, 3)


def test_a_variant_that_repeats_one_known_turn_is_still_recognised():
    answers = [
        PoolAnswer(prompt=1, model="a", turns=("same first turn", "one")),
        PoolAnswer(prompt=1, model="a", turns=("same  first\nturn", "two")),
        PoolAnswer(prompt=1, model="b", turns=("b", "b")),
    ]
    assert by_model(answers)["a"].exact_text == 1.0


def test_the_share_naming_the_model_counts_appearances_under_rotation():
    answers = [
        PoolAnswer(prompt=1, model="a", turns=("I am A",), names_model=True),
        PoolAnswer(prompt=1, model="a", turns=("Hello",)),
        PoolAnswer(prompt=2, model="a", turns=("Hi",)),
        PoolAnswer(prompt=1, model="b", turns=("b",)),
    ]
    assert by_model(answers)["a"].names_model == 0.25


def _long(p: int) -> str:
    return f"# Answer {p}\n\n" + "\n".join(f"- **point {i}** of a long list" for i in range(12))


def test_style_attributes_answers_of_distinct_styles_to_their_models():
    answers = [
        answer
        for p in range(6)
        for answer in (
            PoolAnswer(prompt=p, model="lister", turns=(_long(p),)),
            PoolAnswer(prompt=p, model="terse", turns=(f"Yes {p}.",)),
        )
    ]
    figures = by_model(answers)
    assert (figures["lister"].style, figures["terse"].style) == (1.0, 1.0)


def test_style_is_cross_validated_leaving_out_the_answers_own_prompt():
    # "rare" answered one prompt only: with its prompt held out there is nothing to fit it on,
    # so its answer cannot be attributed to it (a fit on every answer would attribute it).
    answers = [PoolAnswer(prompt=p, model="terse", turns=(f"Yes {p}.",)) for p in range(4)]
    answers += [PoolAnswer(prompt=p, model="lister", turns=(_long(p),)) for p in range(1, 4)]
    answers.append(PoolAnswer(prompt=0, model="rare", turns=(_long(0) * 3,)))
    figures = by_model(answers)
    assert figures["rare"].style == 0.0
    assert figures["terse"].style == 1.0


def test_one_model_has_no_style_figure_and_no_answers_no_figures():
    assert by_model([PoolAnswer(prompt=1, model="a", turns=("x",))])["a"].style is None
    assert recognisability([]) == []
