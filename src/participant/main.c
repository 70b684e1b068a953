/*
 * saga-participant: a participant whose commands are SQL functions in its
 * own schema. PARTICIPANT_NAME names it (schema, role saga_NAME, log name,
 * AMQP queue pgsaga.NAME); PARTICIPANT_COMMANDS says which function handles
 * which command and which undoes it (steps.h). Everything around the
 * functions is the same for every participant: the inbox, voiding, the
 * record of each command (sql/participant/), the outbox and its dispatcher,
 * the transports, TLS, metrics, health and the admin API (service.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin_api.h"
#include "command.h"
#include "functions.h"
#include "service.h"
#include "steps.h"

static struct steps steps;
/* each step's command, then its compensation */
static struct command_type types[2 * STEPS_MAX];
static size_t ntypes;
static const char *name_setting, *commands_setting;

/* SQL: participant_command and participant_compensation, sql/participant/ */
static const char command_sql[] =
	"SELECT * FROM participant_command($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9::int)";
static const char compensation_sql[] =
	"SELECT * FROM participant_compensation($1, $2, $3, $4, $5, $6::jsonb, $7, $8::int)";

/* The command's fields are the function's to read: it gets the whole body. */
static const char *command_fields(const struct command_type *type, struct json_object *obj,
				  const char *extra[COMMAND_MAX_EXTRA], char buf[COMMAND_MAX_EXTRA][32])
{
	const struct step *s = type->arg;

	extra[0] = s->command;
	extra[1] = s->function;
	extra[2] = s->succeeded;
	extra[3] = s->failed;
	extra[4] = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);
	return NULL;
}

static const char *compensation_fields(const struct command_type *type, struct json_object *obj,
				       const char *extra[COMMAND_MAX_EXTRA],
				       char buf[COMMAND_MAX_EXTRA][32])
{
	const struct step *s = type->arg;

	extra[0] = s->command;
	extra[1] = s->undo;
	extra[2] = s->compensated;
	extra[3] = json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN);
	return NULL;
}

static const struct envcfg_var vars[] = {
	{ "PARTICIPANT_NAME", ENVCFG_STRING, &name_setting, NULL, 0, 0,
	  "this participant's name, 1-58 of a-z0-9_: its schema (where its functions are), its "
	  "role saga_NAME, its name in logs, its queue pgsaga.NAME (TRANSPORT=amqp)" },
	{ "PARTICIPANT_COMMANDS", ENVCFG_STRING, &commands_setting, NULL, 0, 0,
	  "its steps, separated by commas, each Command[key]=function(Succeeded|Failed)/"
	  "Compensation=undo_function(Compensated): the command, the SQL function of the schema "
	  "that handles it, the events that answer it, then the compensation that undoes it, its "
	  "function and its event; [key] (optional) names the command's field whose value is the "
	  "row the function contends for, such as [itemId] for an item's stock, so that commands "
	  "committed together lock such rows in one order (docs/participants.md)" },
};

/* The admin API's part of a saga here: its messages and its steps' rows. */
static const struct admin_spec admin = {
	.saga_row = "steps",
	.saga_row_sql =
		"SELECT json_build_object('messages', admin_messages($1, $2, $3::uuid[]),"
		" 'steps', (SELECT json_agg(json_build_object('participant', $2, 'command', s.command,"
		"                'status', s.status, 'event', s.event, 'reason', s.reason, 'output', s.output,"
		"                'createdAt', rfc3339(s.created_at), 'updatedAt', rfc3339(s.updated_at))"
		"                ORDER BY s.created_at)"
		"           FROM participant_steps s WHERE s.saga_id = $1))::text",
};

static bool asks_for_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0 ||
		    strcmp(argv[i], "--version") == 0)
			return true;
	return false;
}

/*
 * The name and the steps are needed before service_init (the schema it
 * migrates, the types it routes); an unset one is left to service_init,
 * which says that it is required.
 */
static int read_steps(const char **name)
{
	const char *n = getenv("PARTICIPANT_NAME"), *c = getenv("PARTICIPANT_COMMANDS");
	char err[256];

	if (n && *n) {
		if (!steps_name_valid(n)) {
			fprintf(stderr, "saga-participant: PARTICIPANT_NAME: expected 1-58 of a-z0-9_ "
					"starting with a letter, got '%s'\n", n);
			return -1;
		}
		*name = n;
	}
	if (c && *c) {
		if (steps_parse(c, &steps, err, sizeof(err)) != 0) {
			fprintf(stderr, "saga-participant: PARTICIPANT_COMMANDS: %s\n", err);
			return -1;
		}
	}
	for (size_t i = 0; i < steps.n; i++) {
		/* grouped by the saga, or by the field its [key] names (steps.h) */
		types[ntypes++] = (struct command_type){ steps.step[i].command, command_sql, 5,
							 command_fields, &steps.step[i], true,
							 steps.step[i].key };
		types[ntypes++] = (struct command_type){ steps.step[i].compensation, compensation_sql,
							 4, compensation_fields, &steps.step[i], true };
	}
	return 0;
}

/* Refuses to serve commands no function can run. */
static int check_functions(struct service *service)
{
	char err[1024];

	if (functions_check(service->database_url, service->spec->service, &steps, err,
			    sizeof(err)) == 0)
		return 0;
	err[strcspn(err, "\n")] = '\0';
	fprintf(stderr, "saga-%s: PARTICIPANT_COMMANDS: %s\n", service->spec->service, err);
	return 2;
}

int main(int argc, char **argv)
{
	struct service_spec spec = {
		.service = "participant",
		.about = "a participant whose commands are SQL functions in its own schema: "
			 "POST /commands/{Type} for the types of PARTICIPANT_COMMANDS",
		.default_addr = "127.0.0.1:8083",
		.migrations = migrations_participant,
		.nmigrations = migrations_participant_count,
		.vars = vars,
		.nvars = sizeof(vars) / sizeof(vars[0]),
		.admin = &admin,
	};

	if (!asks_for_help(argc, argv) && read_steps(&spec.service) != 0)
		return 2;
	return command_main(&spec, types, ntypes, check_functions, argc, argv);
}
