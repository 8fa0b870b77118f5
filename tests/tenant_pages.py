"""What the tenant UI's tests share: URLs of /app/ and the two tenants they visit (with slugs,
which the URLs show), as fixtures the test modules import."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import AccountFactory
from tests.scenarios import member


def url(name: str, account, *args) -> str:
    return reverse(f"growth:tenant:{name}", args=[account.slug, *args])


@pytest.fixture
def tenant():
    return AccountFactory(name="Acme", slug="acme")


@pytest.fixture
def other_tenant():
    return AccountFactory(name="Globex", slug="globex")


@pytest.fixture
def user(client, tenant):
    user = member(tenant)
    client.force_login(user)
    return user
