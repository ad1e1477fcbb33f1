"""One date format across the console (Django's own lists and forms, and our pages): ISO, 24-hour, UTC."""

DATE_FORMAT = SHORT_DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i"
MONTH_DAY_FORMAT = "m-d"
YEAR_MONTH_FORMAT = "Y-m"
