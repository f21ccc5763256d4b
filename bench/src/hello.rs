//! The bare "hello" server: the same HTTP stack as Tern (axum on hyper,
//! tokio multi-thread runtime), answering a fixed body. Its throughput is the
//! ceiling a Tern GET can approach on this machine.

pub(crate) async fn serve(listen: &str) -> anyhow::Result<()> {
    let app = axum::Router::new().route("/hello", axum::routing::get(|| async { "hello" }));
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("hello server listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app).with_graceful_shutdown(crate::shutdown_signal()).await?;
    Ok(())
}
