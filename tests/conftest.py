"""Shared test helpers."""
import multiprocessing

import pytest


@pytest.fixture
def rejected(capsys):
    """`rejected(argv, message)`: the CLI exits with 2 and one line naming the bad parameter, before any
    worker process started."""
    from simlab.cli import main

    def check(argv, message):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2
        assert message in err and err.count("\n") == 1, err
        assert multiprocessing.active_children() == []
    return check
