//! The standard gRPC services served beside boxd's own, on the same socket
//! and under the same peer check: server reflection (`grpc.reflection.v1`
//! and `v1alpha`, so grpcurl, grpcui or Postman need no `.proto` in hand)
//! and `grpc.health.v1`, which says SERVING until the daemon begins to shut
//! down and NOT_SERVING from then on.

use boxd_proto::v1;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// The daemon's serving status, as health checks see it: the whole server
/// (the empty service name) and `boxd.v1.Boxd`.
#[derive(Clone)]
pub struct Health(HealthReporter);

impl Health {
    /// Both names SERVING, and the service that answers for them.
    pub async fn serving() -> (
        Health,
        tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
    ) {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status(v1::SERVICE, ServingStatus::Serving)
            .await;
        (Health(reporter), service)
    }

    /// From the first moment of a shutdown; watchers are told at once.
    pub async fn stopping(&self) {
        for name in ["", v1::SERVICE] {
            self.0
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
    }
}

/// The encoded descriptors reflection serves: boxd's API and the two
/// standard services, so `describe` resolves every type it lists.
const DESCRIPTORS: [&[u8]; 3] = [
    v1::FILE_DESCRIPTOR_SET,
    tonic_health::pb::FILE_DESCRIPTOR_SET,
    tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
];

fn reflection() -> tonic_reflection::server::Builder<'static> {
    DESCRIPTORS
        .into_iter()
        .fold(tonic_reflection::server::Builder::configure(), |b, fds| {
            b.register_encoded_file_descriptor_set(fds)
        })
}

/// `grpc.reflection.v1.ServerReflection`.
pub fn reflection_v1() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    String,
> {
    reflection()
        .build_v1()
        .map_err(|e| format!("server reflection: {e}"))
}

/// `grpc.reflection.v1alpha.ServerReflection`, for older tools.
pub fn reflection_v1alpha() -> Result<
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
    String,
> {
    reflection()
        .build_v1alpha()
        .map_err(|e| format!("server reflection: {e}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_descriptor_decodes_and_reflection_builds() {
        super::reflection_v1().unwrap();
        super::reflection_v1alpha().unwrap();
    }
}
