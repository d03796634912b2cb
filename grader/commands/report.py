"""stub"""
HELP = "todo"


def configure(parser):
    pass


def run(args):
    return 0
