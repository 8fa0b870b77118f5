"""What a request may carry: a NUL in an admin URL is a 4xx before it reaches a query
(PostgreSQL refuses NUL in text: it was a 500). The public pages' own answers to one:
tests/test_unsubscribe.py, tests/test_hostile_input.py."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.scenarios import operator

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("model", "param"), [
    ("campaign", "status__exact"), ("send", "status__exact"), ("subscriber", "status__exact"),
    ("suppression", "reason__exact"), ("feedbackevent", "esp__exact"),
    ("sendingdomain", "algorithm__exact"), ("campaign", "q")])
def test_a_nul_in_an_admin_lists_filter_is_a_400(admin_client, model, param):
    url = reverse(f"admin:growth_{model}_changelist")
    assert admin_client.get(url, {param: "x\x00y"}).status_code == 400
    assert admin_client.get(url, {param: "x"}).status_code == 200


@pytest.mark.parametrize("model", ["maildomain", "workerheartbeat"])
def test_a_nul_in_a_text_id_is_a_404(client, tenant, model):
    client.force_login(operator(tenant))
    assert client.get(f"/admin/growth/{model}/1%00/change/").status_code == 404
