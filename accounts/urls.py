from django.urls import path

from accounts import views

app_name = "accounts"
# Beside django-allauth's pages, which config/urls.py mounts under account/.
urlpatterns = [
    path("account", views.account_page, name="account"),
    path("account/data.json", views.account_data_download, name="data"),
    path("account/delete", views.account_delete_page, name="delete"),
]
