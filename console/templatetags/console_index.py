"""The console index's "does it need me?" panel, as a tag, so the admin's own index view renders it."""

from django import template

from console.attention import attention

register = template.Library()


@register.inclusion_tag("fermix/attention.html")
def needs_you():
    return attention()
