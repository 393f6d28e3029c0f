#!/usr/bin/python3
"""TCP streams between two Slurm tasks: the ceiling for inter-node allreduce on this network.

    srun --mpi=none -N 2 -n 2 /usr/bin/python3 benchmarks/tcp_stream.py [--seconds 3] [--both]

One way (default): task 1 listens on its node's first non-loopback IPv4 address (ephemeral port)
and publishes it through a file in --rendezvous (default /tmp, which both nodes of the local
cluster see); task 0 connects and streams for --seconds; task 1 prints GB/s (1e9 bytes/s) as
received.

--both: two streams at once in opposite directions, task 0 -> task 1 and task 1 -> task 0, one
connection each (as mntrain's TCP transport has one per direction). A 2-rank allreduce moves its
N bytes each way at the same time, so this, not one stream alone, is its ceiling. Each task
listens and publishes, connects to the other, waits until the other has connected to it, then
streams for --seconds while a thread receives; each prints the rate it received, one line per
direction, in the same form as the one-way line (the figure is the next-to-last field).
"""
import argparse
import os
import socket
import threading
import time

CHUNK = 4 << 20


def my_address():
    import fcntl
    import struct
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            return socket.inet_ntoa(packed[20:24])
        except OSError:
            continue
        finally:
            s.close()
    return "127.0.0.1"


def listen_and_publish(path):
    srv = socket.socket()
    srv.bind((my_address(), 0))
    srv.listen(1)
    with open(path + ".tmp", "w") as f:
        f.write("%s %d" % srv.getsockname())
    os.rename(path + ".tmp", path)
    return srv


def connect_published(path):
    deadline = time.time() + 30
    while not os.path.exists(path):
        if time.time() > deadline:
            raise SystemExit(f"tcp_stream: the peer did not publish its address in {path}")
        time.sleep(0.05)
    host, port = open(path).read().split()
    return socket.create_connection((host, int(port)))


def receive(conn, out):
    """Bytes until EOF, timed from the first byte: out = [bytes, seconds]."""
    view = memoryview(bytearray(CHUNK))
    total, t0 = 0, None
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        if t0 is None:
            t0 = time.perf_counter()
        total += n
    out[:] = [total, time.perf_counter() - t0 if t0 is not None else 0.0]


def send_for(sock, seconds):
    data = memoryview(bytearray(CHUNK))
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        sock.sendall(data)
    sock.close()


def report(total, dt, what):
    node = os.environ.get("SLURMD_NODENAME", "?")
    rate = total / dt / 1e9 if dt > 0 else 0.0
    print(f"tcp stream {node} <- peer{what}: {total / 1e9:.2f} GB in {dt:.2f} s = {rate:.3f} GB/s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rendezvous", default="/tmp")
    ap.add_argument("--both", action="store_true", help="two streams at once, one each way")
    a = ap.parse_args()
    rank = int(os.environ["SLURM_PROCID"])
    job = os.environ.get("SLURM_JOB_ID", "0") + "." + os.environ.get("SLURM_STEP_ID", "0")
    path = os.path.join(a.rendezvous, f"tcp-stream-{job}")
    if a.both:
        mine, theirs = f"{path}.{rank}", f"{path}.{1 - rank}"
        srv = listen_and_publish(mine)
        got, accepted = [0, 0.0], threading.Event()

        def serve():
            conn, _ = srv.accept()
            accepted.set()
            receive(conn, got)

        rx = threading.Thread(target=serve)
        rx.start()
        sock = connect_published(theirs)
        if not accepted.wait(30):  # both connections up: the two streams start together
            raise SystemExit("tcp_stream: the peer did not connect")
        os.unlink(mine)
        send_for(sock, a.seconds)
        rx.join()
        report(got[0], got[1], " (both ways at once)")
    elif rank == 1:
        srv = listen_and_publish(path)
        conn, _ = srv.accept()
        got = [0, 0.0]
        receive(conn, got)
        report(got[0], got[1], "")
        os.unlink(path)
    else:
        send_for(connect_published(path), a.seconds)


if __name__ == "__main__":
    main()
