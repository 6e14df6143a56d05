"""allauth's sign-up form, saying that its password is optional (``ACCOUNT_FORMS``)."""

from typing import Any

from allauth.account.forms import SignupForm as AllauthSignupForm
from django.utils.translation import gettext_lazy


class SignupForm(AllauthSignupForm):  # type: ignore[misc]
    """A new account needs an email address; without a password, its owner signs in with a
    code mailed each time (``ACCOUNT_SIGNUP_FIELDS``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        password = self.fields.get("password1")
        if password is not None and not password.required:
            password.label = gettext_lazy("Password (optional)")
