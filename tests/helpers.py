"""Assertions shared by the browser tests."""


def assert_names_revealed(page, battle) -> None:
    """After the vote, each side's name slot shows that side's model."""
    for side, model in (("a", battle.model_a), ("b", battle.model_b)):
        assert page.get_by_test_id(f"model-name-{side}").inner_text().startswith(model.display_name)


def revealed_names(page) -> tuple[str, str]:
    """The model names shown on sides A and B after a vote (without their organization)."""
    return tuple(  # type: ignore[return-value]
        page.get_by_test_id(f"model-name-{side}").evaluate("el => el.firstChild.textContent")
        for side in "ab"
    )
