//! A Uniffle application's first calls against a node, as the stock client
//! makes them, for the tests that need a live Uniffle application.

use switchyard_clients::uniffle::{Coordinator, ShuffleServer, Transport};

use super::cluster::Node;

/// Registers `app` with `node`'s coordinator (with its client version when
/// `client` is given), asks for 4 partitions of shuffle 0 over gRPC and
/// registers them on the server it names; that server's connection is
/// returned for the test's own blocks.
pub async fn shuffle_of_four(node: &Node, app: &str, client: Option<&str>) -> ShuffleServer {
    let mut coordinator = Coordinator::connect(&node.uniffle_coordinator().to_string())
        .await
        .unwrap();
    if let Some(version) = client {
        coordinator
            .register_application_info(app, "alice", Some(version))
            .await
            .unwrap();
    }
    let assigned = coordinator
        .assignments(app, 0, 4, Transport::Grpc)
        .await
        .unwrap();
    let mut server = ShuffleServer::connect(&assigned[0].server[0], Transport::Grpc)
        .await
        .unwrap();
    server.register_shuffle(app, 0, &[(0, 3)]).await.unwrap();
    server
}
