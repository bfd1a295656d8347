# Sourced by the benches that measure the bridge: builds the connect_latency bench, the chart
# (benches/chart.rs) and the release netbox, and sets `latency_bin`, `chart_bin` and `netbox`
# to their paths.
cargo bench --quiet --bench connect_latency --bench chart --no-run 2>/dev/null
bench_bin() {
    cargo bench --bench "$1" --no-run --message-format=json 2>/dev/null \
        | sed -n "s/.*\"executable\":\"\([^\"]*\/$1-[^\"]*\)\".*/\1/p" | tail -n1
}
latency_bin=$(bench_bin connect_latency)
chart_bin=$(bench_bin chart)
# Last: building a bench relinks the release netbox with the dev-dependencies' features;
# the one measured is the one users build.
cargo build --release --quiet --bin netbox
netbox="target/$(rustc -vV | sed -n "s/^host: //p")/release/netbox"
