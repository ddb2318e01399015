"""The report page: python -m trainer.report OUT (trainer/report/page.py)."""
from trainer.report import page

page.main()
