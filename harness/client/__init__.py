"""The client layer: what a benchmark client does, whatever it drives.

`arrivals` sets each request's send time (burst, Poisson/gamma, trace timestamps); `releases`
holds the client-side concurrency cap and releases turn k+1 of a conversation when turn k has
finished; `inprocess` drives the built-in engine with them. A live-server target drives its HTTP
client with the same `ReleaseQueue`.
"""
