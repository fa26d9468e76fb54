"""A keep-alive client as pip's urllib3 is: Python's http.client.

It asks the proxy for a (an upstream that answers every GET with an
unsolicited 101) and then, on the same connection, for b with Basic
credentials for b. Python treats a 101 as a final answer without a body and
keeps the connection, so a proxy that relayed the 101 as a protocol switch
would hand b's credentials to a. Prints the two statuses and b's body.
"""
import http.client
import json
import sys

proxy, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
host, port = proxy.rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port), timeout=10)
conn.request("GET", a)
first = conn.getresponse()
first.read()
try:
    conn.request("GET", b, headers={"Authorization": "Basic Yi11c2VyOmItc2VjcmV0"})
    second = conn.getresponse()
    body = second.read().decode(errors="replace")
    status = second.status
except Exception as e:  # a connection the proxy closed is an honest answer too
    status, body = 0, "error: %s" % e
print(json.dumps({"first": first.status, "second": status, "second_body": body}))
