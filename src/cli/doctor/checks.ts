/**
 * The checks `platform doctor` runs, in the order it prints them. To add one: write a DoctorCheck
 * (check.ts) in this folder, or in the module of the command it checks, and put it here where it
 * belongs in that order (docs/workspace.md, "Adding a check").
 */
import type { DoctorCheck } from "./check.ts";
import { clusterCheck } from "./cluster.ts";
import { engineCheck } from "./engine.ts";
import { builderCheck, imageRegistryCheck, imageSessionCheck } from "./container-images.ts";
import { protosCheck } from "./protos.ts";
import { registryCredentialCheck } from "./registry-credential.ts";
import { serviceReplicasCheck, serviceRolloutCheck, serviceRouteCheck } from "./services.ts";
import { credentialsCheck, organizationCheck, platformCheck } from "./platform.ts";
import { cliCheck } from "./runtime.ts";
import { bufCheck, gitCheck } from "./tools.ts";
import { trainerCheck } from "./trainer.ts";
import { workspaceCheck } from "./workspace.ts";

export const DOCTOR_CHECKS: readonly DoctorCheck[] = [
  cliCheck,
  workspaceCheck,
  platformCheck,
  credentialsCheck,
  organizationCheck,
  bufCheck,
  protosCheck,
  gitCheck,
  builderCheck,
  imageRegistryCheck,
  imageSessionCheck,
  registryCredentialCheck,
  serviceRolloutCheck,
  serviceReplicasCheck,
  serviceRouteCheck,
  clusterCheck,
  trainerCheck,
  engineCheck,
];
