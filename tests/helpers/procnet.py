"""/proc/net/tcp and tcp6 as the kernel prints them, for the tests of who listens on a port: the
scan script's awk filter (tests/test_identity_parse.py) and the local manager's in-process reader
(tests/unit/test_identity_readers.py) read the same samples and must give the same answers.

TCP: listeners first; row 2 is a connection to the listener on 30000 (0x7530), row 4 a LISTEN row
after it (the kernel never prints one there). TCP6: one listener on ::1, port 30002.
"""

from __future__ import annotations

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 880467 1 0000 100 0 0 10 0
   1: 0100007F:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 880468 1 0000 100 0 0 10 0
   2: 0100007F:7530 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 990001 1 0000 20 4 30 10 -1
   3: 0100007F:C350 0100007F:7532 06 00000000:00000000 03:00000F9E 00000000     0        0 0 3 0000
   4: 0100007F:7533 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 880469 1 0000 100 0 0 10 0
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:7532 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000   998        0 770001 1 0000 100 0 0 10 0
"""  # noqa: E501
