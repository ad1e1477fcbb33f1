from django.apps import AppConfig


class ResourcesConfig(AppConfig):
    name = "resources"

    def ready(self):
        from fermix_site import node
        from resources.services import resource_sync_every_agent

        node.on_beat(resource_sync_every_agent)
