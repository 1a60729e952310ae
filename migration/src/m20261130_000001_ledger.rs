use sea_orm_migration::prelude::*;

/// The five tables of SPEC §2, their invariants, and row-level security.
pub struct Migration;

impl MigrationName for Migration {
    fn name(&self) -> &str {
        "m20261130_000001_ledger"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(include_str!("sql/0001_ledger.up.sql")).await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.get_connection().execute_unprepared(include_str!("sql/0001_ledger.down.sql")).await?;
        Ok(())
    }
}
