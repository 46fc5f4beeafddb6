//! The BoxLite engine's images: BoxLite's own store.

use std::path::Path;

use async_trait::async_trait;

use super::{BoxliteEngine, map_err, pull_error};
use crate::engine::{Images, InUse};
use crate::error::{Error, Result};

/// Images live in BoxLite's own store (`runtime.images()`); boxd adds no
/// cache of its own. BoxLite reports no byte progress, so a pull sends
/// `started` and `done` only; import and prune are not offered by BoxLite.
#[async_trait]
impl Images for BoxliteEngine {
    async fn pull(
        &self,
        reference: &str,
        progress: crate::image::pull::Progress,
    ) -> Result<crate::model::ImageInfo> {
        self.local_only(
            "pulling an image through boxd (the server gets a box's image when it first starts)",
        )?;
        progress
            .send(crate::model::PullEvent::Started {
                reference: reference.to_owned(),
                digest: String::new(),
                layers: Vec::new(),
                total_bytes: 0,
            })
            .await;
        let images = self
            .runtime
            .images()
            .map_err(|e| map_err("BoxLite images", e))?;
        let image = images
            .pull(reference)
            .await
            .map_err(|e| pull_error(reference, e))?;
        Ok(crate::model::ImageInfo {
            references: vec![image.reference().to_owned()],
            digest: image.manifest_digest().to_owned(),
            repo_digest: image.manifest_digest().to_owned(),
            size: image.total_layer_size().max(0) as u64,
            layers: image.layer_count() as u32,
            ..Default::default()
        })
    }

    async fn list(&self) -> Result<Vec<crate::model::ImageInfo>> {
        let images = self
            .runtime
            .images()
            .map_err(|e| map_err("BoxLite images", e))?;
        let list = images
            .list()
            .await
            .map_err(|e| map_err("list BoxLite images", e))?;
        Ok(list
            .into_iter()
            .map(|i| crate::model::ImageInfo {
                references: vec![i.reference],
                digest: i.id.clone(),
                repo_digest: i.id,
                size: i.size.map_or(0, u64::from),
                added_at_ms: i.cached_at.timestamp_millis(),
                ..Default::default()
            })
            .collect())
    }

    async fn inspect(&self, reference: &str) -> Result<crate::model::ImageInfo> {
        Images::list(self)
            .await?
            .into_iter()
            .find(|i| i.digest == reference || i.references.iter().any(|r| r == reference))
            .ok_or_else(|| Error::NotFound(format!("no image {reference} in BoxLite's store")))
    }

    async fn remove(
        &self,
        reference: &str,
        in_use: &InUse,
        force: bool,
    ) -> Result<crate::model::RemovedImage> {
        let info = Images::inspect(self, reference).await?;
        if let Some(boxes) = in_use.get(&info.digest).filter(|b| !b.is_empty() && !force) {
            return Err(Error::FailedPrecondition(format!(
                "image {reference} is used by {}; a BoxLite box re-reads its image at every start",
                boxes.join(", ")
            )));
        }
        let name = reference
            .rsplit_once(':')
            .filter(|(_, tag)| !tag.contains('/'))
            .map_or(reference, |(name, _)| name);
        let images = self
            .runtime
            .images()
            .map_err(|e| map_err("BoxLite images", e))?;
        images
            .remove(name)
            .await
            .map_err(|e| map_err("remove a BoxLite image", e))?;
        Ok(crate::model::RemovedImage {
            untagged: info.references,
            deleted: vec![info.digest],
        })
    }

    async fn prune(&self, _in_use: &InUse) -> Result<crate::model::Pruned> {
        Err(Error::Unimplemented(
            "BoxLite keeps layers itself; prune is not offered on the BoxLite engine".into(),
        ))
    }

    async fn import(
        &self,
        _path: &Path,
        _reference: Option<&str>,
    ) -> Result<crate::model::ImageInfo> {
        Err(Error::Unimplemented(
            "import is not offered on the BoxLite engine: give the layout directory to `create --image` instead".into(),
        ))
    }
}
