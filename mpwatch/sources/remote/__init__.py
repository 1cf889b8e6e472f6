"""A live run on another machine, through `ssh -T HOST mpwatch bridge`: the client and the wire."""
