# Sourced by the benches that measure the bridge: builds the connect_latency bench and the
# release netbox, and sets `latency_bin` and `netbox` to their paths.
cargo bench --quiet --bench connect_latency --no-run 2>/dev/null
latency_bin=$(cargo bench --bench connect_latency --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*connect_latency[^"]*\)".*/\1/p' | tail -n1)
# Last: building a bench relinks the release netbox with the dev-dependencies' features;
# the one measured is the one users build.
cargo build --release --quiet --bin netbox
netbox="target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
