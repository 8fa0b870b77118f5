"""A real DNS server on loopback (UDP, dnspython) for the tests: MX and TXT records from dicts,
NXDOMAIN for every other name, SERVFAIL for names told to fail, or no answer at all (a dead resolver).
It records every question it is asked."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.rrset


class DnsServer:
    def __init__(self, mx: dict[str, list[tuple[int, str]]] | None = None, *,
                 txt: dict[str, list[str]] | None = None,
                 servfail: Iterable[str] = (), silent: bool = False) -> None:
        """``mx``: {domain: [(preference, host), ...]} ([] for a name without MX); ``txt``:
        {name: [record, ...]}, each record sent as strings of at most 255 octets (changeable
        while it serves); ``servfail``: names answered SERVFAIL; ``silent``: never answer."""
        self.mx = {name.lower().rstrip("."): records for name, records in (mx or {}).items()}
        self.txt = {name.lower().rstrip("."): records for name, records in (txt or {}).items()}
        self.servfail = {name.lower().rstrip(".") for name in servfail}
        self.silent = silent
        self.questions: list[str] = []  # the names asked, in order
        self._lock = threading.Lock()
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="dns-server", daemon=True)

    @property
    def address(self) -> str:
        """The DESTINATIONS_DNS value that points at this server."""
        host, port = self._socket.getsockname()
        return f"{host}:{port}"

    def asked(self) -> list[str]:
        with self._lock:
            return list(self.questions)

    def start(self) -> DnsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                wire, client = self._socket.recvfrom(65535)
            except TimeoutError:
                continue
            try:
                query = dns.message.from_wire(wire)
            except dns.exception.DNSException:
                continue
            question = query.question[0]
            name = question.name.to_text(omit_final_dot=True).lower()
            with self._lock:
                self.questions.append(name)
            if not self.silent:
                self._socket.sendto(self._response(query, name, question.rdtype).to_wire(), client)

    def _response(self, query: dns.message.Message, name: str, rdtype: int) -> dns.message.Message:
        response = dns.message.make_response(query)
        response.flags |= dns.flags.RA
        if name in self.servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
        elif name not in self.mx and name not in self.txt:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif rdtype == dns.rdatatype.MX and self.mx.get(name):
            records = [f"{preference} {host}." for preference, host in self.mx[name]]
            response.answer.append(dns.rrset.from_text_list(
                dns.name.from_text(name), 300, dns.rdataclass.IN, dns.rdatatype.MX, records))
        elif rdtype == dns.rdatatype.TXT and self.txt.get(name):
            records = [dns.rdtypes.ANY.TXT.TXT(
                dns.rdataclass.IN, dns.rdatatype.TXT,
                [record.encode()[i:i + 255] for i in range(0, len(record.encode()), 255)])
                for record in self.txt[name]]
            response.answer.append(dns.rrset.from_rdata_list(dns.name.from_text(name), 300, records))
        return response
