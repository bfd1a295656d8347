import socket, time, hashlib, os, sys
def conn():
    s=socket.create_connection(("127.0.0.1",7100)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY,1); return s
def recv_all(s, t=2):
    s.settimeout(t); d=b""
    try:
        while True:
            b=s.recv(65536)
            if not b: break
            d+=b
    except Exception as e: d+=f"<{type(e).__name__}>".encode()
    return d
