"""The progress of long commands: a bar on a terminal, a line every N units elsewhere."""

import io

from django.core.management.base import OutputWrapper

from fermix_site.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_off_a_terminal_it_writes_a_line_each_n_units_and_the_total_once():
    out = io.StringIO()
    bar = Progress(OutputWrapper(out), 25, every=10, label="exported")
    for done in (3, 9, 12, 19, 20, 25):
        bar.update(done)
    bar.finish()
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["exported 12/25 rows", "exported 20/25 rows",
                                                       "exported 25/25 rows"]
    assert "\r" not in out.getvalue()


def test_a_last_line_already_written_is_not_repeated():
    out = io.StringIO()
    bar = Progress(OutputWrapper(out), 20, every=10)
    bar.update(20)
    bar.finish()
    assert len(out.getvalue().splitlines()) == 1


def test_on_a_terminal_it_redraws_one_bar_and_ends_its_line():
    out = Terminal()
    bar = Progress(OutputWrapper(out), 4, unit="mirror", every=1, label="rebuilt")
    bar.update(2)
    bar.update(4)
    bar.finish()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\rrebuilt [" + "#" * 30 + "] 4/4 mirrors\n")
    assert "\rrebuilt [" + "#" * 15 + "." * 15 + "] 2/4 mirrors" in text


def test_without_a_total_it_counts():
    out = Terminal()
    bar = Progress(OutputWrapper(out), 0, every=2)
    bar.update(3)
    bar.finish()
    assert out.getvalue().splitlines()[-1].startswith("3 rows (")
