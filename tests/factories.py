from __future__ import annotations

import factory
from django.utils import timezone

from growth.models import Account, Campaign, Segment, Subscriber


class AccountFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Account

    name = factory.Sequence(lambda n: f"Tenant {n}")
    slug = factory.Sequence(lambda n: f"tenant-{n}")
    from_email = factory.Sequence(lambda n: f"news@tenant{n}.example")
    from_name = factory.LazyAttribute(lambda a: a.name)


class SegmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Segment

    account = factory.SubFactory(AccountFactory)
    name = factory.Sequence(lambda n: f"Segment {n}")


class SubscriberFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Subscriber

    segment = factory.SubFactory(SegmentFactory)
    account = factory.LazyAttribute(lambda s: s.segment.account)
    email = factory.Sequence(lambda n: f"person{n}@example.com")
    status = Subscriber.Status.CONFIRMED


class CampaignFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Campaign

    account = factory.SubFactory(AccountFactory)
    name = factory.Sequence(lambda n: f"Campaign {n}")
    subject = "Hello {{ email }}"
    body_text = "Hi {{ email }}.\n\nUnsubscribe: {{ unsubscribe_url }}\n"
    body_html = ""
    # a minute ago: in a test transaction the database's now() is the transaction's start
    scheduled_for = factory.LazyFunction(lambda: timezone.now() - timezone.timedelta(minutes=1))


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "auth.User"
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@staff.example")
    password = factory.PostGenerationMethodCall("set_password", "pw")

    @factory.post_generation
    def saved(self, create, extracted, **kwargs):
        if create:
            self.save()
