"""Assertions shared by the browser tests."""


def assert_names_revealed(page, battle) -> None:
    """After the vote, each side's name slot shows that side's model."""
    for side, model in (("a", battle.model_a), ("b", battle.model_b)):
        assert page.get_by_test_id(f"model-name-{side}").inner_text().startswith(model.display_name)
